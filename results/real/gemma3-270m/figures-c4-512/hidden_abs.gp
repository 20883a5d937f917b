# qeval: mean |hidden state| per layer x channel (index 0: first token, 1: other tokens)
set terminal pngcairo size 1100,760 noenhanced font 'sans,10'
set output 'hidden_abs.png'
set palette defined (0 '#000004', 0.2 '#3b0f70', 0.4 '#8c2981', 0.6 '#de4968', 0.8 '#fe9f6d', 1 '#fcfdbf')
set multiplot layout 2,1 title 'gemma-3-270m-q4_k_m: mean |hidden state| per layer and channel (8 windows)'
set xrange [-0.5:639.5]
set yrange [0.5:18.5]
set ytics 1
set tics out
set xlabel 'channel'
set ylabel 'layer'
set logscale cb
set cbrange [*:*]
set title 'first token'
plot 'hidden_abs.dat' index 0 matrix using 1:($2+1):3 with image notitle
set title 'other tokens (mean over positions)'
plot 'hidden_abs.dat' index 1 matrix using 1:($2+1):3 with image notitle
unset multiplot
