"""Print the environment: ``python -m mmsoft.utils.collect_env``."""
from mmsoft.utils.env import main

if __name__ == '__main__':
    main()
