import sys

from actor.main import main

sys.exit(main())
