import sys

from ga3c.GA3C import main

if __name__ == "__main__":
    sys.exit(main())
