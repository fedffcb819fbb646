# asv imports the benchmarks without the project root on sys.path (`asv run --python=same`
# builds nothing): put it there so `import ledger` finds the working copy.
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
