"""The engine's side of a many-node sweep, with no torch: the launch read from the environment (launch.py), the
NodeLink a Sweep talks through (node_link.py), every node's result merged into one trial (merge.py), the per-node
rows and who paces the job (node_rows.py), per-rank notes (rank_notes.py)."""
