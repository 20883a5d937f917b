namespace qeval { int loaders_marker = 0; }
