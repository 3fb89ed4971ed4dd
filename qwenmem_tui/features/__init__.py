"""qwenmem's features, one package each (memory, ...), and their assembly (`assembly.py`).

Kept empty on purpose: importing one feature's module (say `features.memory.cli`)
must not load the whole assembly and every other feature with it.
"""
