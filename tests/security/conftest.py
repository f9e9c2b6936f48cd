"""The security suite imports its shared hostile programs by module name."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
