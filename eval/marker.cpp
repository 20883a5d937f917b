namespace qeval { int eval_marker = 0; }
