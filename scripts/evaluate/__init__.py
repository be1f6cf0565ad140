"""`make eval` (`python -m scripts.evaluate`): a checkpoint played on every level of a set.

main.py is the command; checkpoint.py finds and checks the checkpoint; matrix.py plays the levels
and tabulates them; tables.py writes the tables. The episodes step through the training actor's
own path (actor/evaluation.py)."""
