"""Facades with the interfaces of the reference libraries for people switching: ``holo``
(holo-bench's ``Ehrlich`` test function) and ``poli`` (poli's black boxes, both ways).
"""
