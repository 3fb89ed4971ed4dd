"""The session recap (contract §5): the recap writer and the away-recap state machine."""
