"""report stage (see shared/DESIGN.md)."""
