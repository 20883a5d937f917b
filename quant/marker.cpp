namespace qeval { int quant_marker = 0; }
