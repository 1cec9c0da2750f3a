"""Type checks shared by the argument validators (bools are not numbers here: ``steps=True`` is an error)."""
import numbers


def is_int(value) -> bool:
    """An integer (Python or NumPy), not a bool."""
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def is_real(value) -> bool:
    """A real number (int, float, NumPy scalar), not a bool; may be inf / nan."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool)
