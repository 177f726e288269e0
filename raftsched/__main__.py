import sys

from raftsched.cli.main import main

sys.exit(main())
