"""The panes: each reads the app's SweepState and renders itself; none holds data of its own."""
