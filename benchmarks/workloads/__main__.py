import sys

from benchmarks.workloads.bench import main

sys.exit(main())
