"""model stage (see shared/DESIGN.md)."""
