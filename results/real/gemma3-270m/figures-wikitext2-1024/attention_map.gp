# qeval: mean attention map (matrix: row = query, column = key)
set terminal pngcairo size 760,680 noenhanced font 'sans,10'
set output 'attention_map.png'
set palette defined (0 '#000004', 0.2 '#3b0f70', 0.4 '#8c2981', 0.6 '#de4968', 0.8 '#fe9f6d', 1 '#fcfdbf')
set title 'gemma-3-270m-q4_k_m: mean attention over layers and heads (first 64 tokens, 4 windows)'
set xrange [-0.5:63.5]
set yrange [63.5:-0.5]
set size ratio -1
set xlabel 'key position'
set ylabel 'query position'
set cblabel 'attention weight (log scale)'
set logscale cb
set cbrange [1e-4:1]
set tics out
plot 'attention_map.dat' matrix with image notitle
