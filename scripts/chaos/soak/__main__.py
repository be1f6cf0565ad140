import sys

from scripts.chaos.soak.loop import main

sys.exit(main())
