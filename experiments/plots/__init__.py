"""Figures from a Canopy results.json: `render_all(results, out_dir, formats)` (see figures.py).

The figures (matplotlib) load on first use, so that `plots.data` (the results rows and input
labels) serves scripts without matplotlib too."""

__all__ = ["FIGURES", "render_all"]


def __getattr__(name):
    if name in __all__:
        from . import figures
        return getattr(figures, name)
    raise AttributeError(f"module 'plots' has no attribute '{name}'")
