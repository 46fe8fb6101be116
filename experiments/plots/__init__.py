"""Figures from a Canopy results.json: `render_all(results, out_dir, formats)` (see figures.py)."""
from .figures import FIGURES, render_all

__all__ = ["FIGURES", "render_all"]
