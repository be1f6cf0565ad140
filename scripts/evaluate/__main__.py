import sys

from scripts.evaluate.main import main

sys.exit(main())
