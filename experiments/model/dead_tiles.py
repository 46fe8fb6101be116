#!/usr/bin/env python3
"""Dead KV tiles of tree-verify attention: the share of a step's KV tiles that the tile kernels can
leave out, for DDTree-like trees shaped as canopy's generator shapes them (core/canopy_Generator.cpp:
a 16-node spine, side nodes hanging off its first half with probability 0.7, else off any earlier
node, depth capped at 15; the shape rule, not the generator's random stream).

A row tile of M rows folds heads x nodes (H heads: M / H nodes). A node sees the prefix, itself and
its ancestors (parent[i] < i), so a KV tile of N keys holding tree keys none of its nodes see is
dead. Per (row tile, KV tile) the model counts:
  dense: every tile of [0, P + T)                         (the kernels before, and cuda-flat)
  trim:  up to the tile holding the row tile's last node  (markLiveTiles' kTrim: the loop stops there)
  skip:  the prefix tiles plus the tree tiles with a visible key (the skipping schedule that
         docs/results/dead-tiles.md measured and did not keep)
and prints trim / dense and skip / dense over all row tiles (the work the step keeps, one split per
row tile, the tree after a P-key prefix).

    experiments/model/dead_tiles.py [--trees 256,512,1024] [--prefixes 4096,16384] [--heads 8]
                                    [--rows 64] [--keys 64] [--seed 1]
    experiments/model/dead_tiles.py --self-test
"""
import argparse
import random
import sys

SPINE = 16
MAX_DEPTH = 15


def draft_tree(size, seed):
    """parent[i] < i for a DDTree-like tree of `size` nodes (root 0 has parent -1)."""
    rng = random.Random(seed)
    spine = min(size, max(1, min(SPINE, size // 2 + 1)))
    parent = [-1] + list(range(spine - 1))
    depth = list(range(spine))
    while len(parent) < size:
        n = len(parent)
        if rng.random() < 0.3:
            p = rng.randrange(n)
        else:
            p = min(spine - 1, rng.randrange(spine) // 2 + rng.randrange(2))
        if depth[p] >= MAX_DEPTH:
            p = 0
        parent.append(p)
        depth.append(depth[p] + 1)
    return parent


def kept_work(parent, prefix, heads, rows, keys):
    """(trim, skip) tiles over dense tiles for one request of tree `parent` after `prefix` keys."""
    T = len(parent)
    ancestors = []
    for i in range(T):
        seen, k = set(), i
        while k >= 0:
            seen.add(k)
            k = parent[k]
        ancestors.append(seen)
    first_tree_tile = prefix // keys
    tree_tiles = (prefix + T - 1) // keys - first_tree_tile + 1
    dense = trim = skip = 0
    for r0 in range(0, T * heads, rows):
        nodes = range(r0 // heads, min(T, (r0 + rows - 1) // heads + 1))
        visible = set().union(*(ancestors[n] for n in nodes))
        live = {(prefix + k) // keys for k in visible}
        dense += first_tree_tile + tree_tiles
        trim += max(live) + 1
        skip += first_tree_tile + len(live - set(range(first_tree_tile)))
    return trim / dense, skip / dense


def self_test():
    # A chain: every node sees every earlier one, so nothing before a row tile's last node is dead.
    chain = [-1] + list(range(15))
    trim, skip = kept_work(chain, 0, 1, 4, 4)
    assert abs(trim - 10 / 16) < 1e-12 and abs(skip - trim) < 1e-12, (trim, skip)  # tiles 1+2+3+4 of 4 each
    # A star (every node a child of the root): a row tile sees tile 0 and its own tiles only.
    star = [-1] + [0] * 15
    trim, skip = kept_work(star, 0, 1, 4, 4)
    assert abs(trim - 10 / 16) < 1e-12 and abs(skip - 7 / 16) < 1e-12, (trim, skip)
    # The generator's shape rule: a spine first, parents before children, depth capped.
    t = draft_tree(1024, 1)
    assert t[0] == -1 and all(0 <= p < i for i, p in enumerate(t) if i)
    trim, skip = kept_work(t, 4096, 8, 64, 64)
    assert skip < trim < 1.0, (trim, skip)
    print("dead_tiles self-test ok")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", default="256,512,1024")
    ap.add_argument("--prefixes", default="4096,16384")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--rows", type=int, default=64, help="rows per row tile (both tile kernels: 64)")
    ap.add_argument("--keys", type=int, default=64, help="keys per KV tile (cuda-sm90: 64, cuda-sm120: 32)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    print(f"| T | P | trim: work kept | skip: work kept |  (H = {a.heads}, {a.rows}-row tiles, {a.keys}-key tiles)")
    print("|---:|---:|---:|---:|")
    for T in (int(x) for x in a.trees.split(",")):
        tree = draft_tree(T, a.seed)
        for P in (int(x) for x in a.prefixes.split(",")):
            trim, skip = kept_work(tree, P, a.heads, a.rows, a.keys)
            print(f"| {T} | {P} | {trim:.3f} | {skip:.3f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
