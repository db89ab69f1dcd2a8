"""Repository-wide pytest setup: optional extras' modules are not collected when the extra is missing
(their tests skip with the reason; their doctests would fail to import)."""
import importlib.util

collect_ignore_glob = [] if importlib.util.find_spec("torch") else ["solverfuse/torch/*"]
