"""The skill itself: one SKILL.md read and checked, the folders searched for skills, the catalog a model sees, and the description linter."""
