"""One file -> its parts: columns, the tree rule, the reduction passes, intervals, the critical path's walk."""
