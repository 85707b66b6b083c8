"""profile stage (see shared/DESIGN.md)."""
