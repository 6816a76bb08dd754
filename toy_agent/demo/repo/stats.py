"""Small statistics helpers used by the report."""


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)


def median(values):
    """Middle value of a non-empty sequence (mean of the two middle ones when even)."""
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return ordered[middle]
