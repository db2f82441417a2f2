"""The terminal sizes every loadertop screen lays out for: the stylesheets key on these breakpoint classes."""

from __future__ import annotations

MIN_WIDTH, MIN_HEIGHT = 80, 24
# App.HORIZONTAL_BREAKPOINTS / VERTICAL_BREAKPOINTS: the class each size range gets (loadertop.tcss uses them).
HORIZONTAL = [(0, "-narrow"), (MIN_WIDTH, "-w80"), (120, "-w120")]
VERTICAL = [(0, "-short"), (MIN_HEIGHT, "-h24"), (40, "-h40")]
