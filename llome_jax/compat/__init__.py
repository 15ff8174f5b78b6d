"""Facades with the interfaces of the reference libraries (holo-bench, poli) for people switching."""
