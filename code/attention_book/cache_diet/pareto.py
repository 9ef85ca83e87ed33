"""The Pareto front of cache bytes against perplexity: the techniques that no other one beats on both.

A point (bytes, perplexity) is *dominated* when another point caches no more bytes and has no higher perplexity,
and is strictly better on at least one of the two. The front is every point not dominated. Lower is better on both
axes. Being on the front says only that nothing beats a point on both axes: the smallest cache is always on it,
however bad its perplexity.
"""
import math
import numbers


def pareto_front_names(points):
    """The names of the points on the Pareto front, in order of increasing bytes.

    Args:
        points: name -> (bytes, perplexity), both positive finite numbers; lower is better for both.
    Returns:
        a list of names: every point that no other point dominates (no more bytes, no higher perplexity, and less
        of at least one), sorted by bytes, then by perplexity.
    """
    if not isinstance(points, dict) or not points:
        raise ValueError(f"points must be a non-empty dict of name -> (bytes, perplexity), got {points!r}")
    for name, point in points.items():
        if not (isinstance(point, (tuple, list)) and len(point) == 2 and all(
                isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x) and x > 0
                for x in point)):
            raise ValueError(f"points[{name!r}] must be (bytes, perplexity), two positive finite numbers, "
                             f"got {point!r}")

    def dominated(name):
        b, p = points[name]
        return any(ob <= b and op <= p and (ob < b or op < p)
                   for other, (ob, op) in points.items() if other != name)

    return sorted((name for name in points if not dominated(name)), key=lambda name: tuple(points[name]))
