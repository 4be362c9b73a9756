"""The float64 reference forward pass now lives in chatapp (chatapp/convert/reference.py: the
fidelity measurement uses it too); the converter tests keep importing it from here."""

from chatapp.convert.reference import ReferenceLlama, ReferenceModel

__all__ = ["ReferenceLlama", "ReferenceModel"]
