"""data stage (see shared/DESIGN.md)."""
