"""``python -m ece408_op <command> ...``"""
import sys

from .cli import main

sys.exit(main())
