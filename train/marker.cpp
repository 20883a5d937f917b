namespace qeval { int train_marker = 0; }
