import sys

from perfsuite.commands.main import main

sys.exit(main())
