import sys

from hyrl.cli import main

sys.exit(main())
