"""Renderers: text for people, JSON for programs (same content), Markdown for reviews."""
