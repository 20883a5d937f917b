set terminal pngcairo size 1400,1500 font ',10'
set output 'trajectory.png'
set datafile missing 'NaN'
set logscale x
set grid
set key top left font ',8'
set xlabel 'tokens seen'
set multiplot layout 4,2 title 'trajectory over training (full precision unless named)'
set title 'perplexity'
set logscale y
plot 'trajectory.dat' index 0 using 1:2 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3', \
     'trajectory.dat' index 1 using 1:2 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3'
set title 'quantisation penalty: paired ΔNLL (nats a token)'
unset logscale y
plot 'trajectory.dat' index 0 using 1:11 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3 int8-coarse', \
     'trajectory.dat' index 1 using 1:11 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3 int8-coarse'
set title 'kurtosis (solid: other tokens, dashed: first token)'
set logscale y
plot 'trajectory.dat' index 0 using 1:5 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3 rest', \
     'trajectory.dat' index 1 using 1:5 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3 rest', \
     'trajectory.dat' index 0 using 1:4 with linespoints lw 2 dt 2 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3 first', \
     'trajectory.dat' index 1 using 1:4 with linespoints lw 2 dt 2 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3 first'
set title 'max |X| (solid: other tokens, dashed: first token)'
set logscale y
plot 'trajectory.dat' index 0 using 1:7 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3 rest', \
     'trajectory.dat' index 1 using 1:7 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3 rest', \
     'trajectory.dat' index 0 using 1:6 with linespoints lw 2 dt 2 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3 first', \
     'trajectory.dat' index 1 using 1:6 with linespoints lw 2 dt 2 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3 first'
set title '%first-attn'
unset logscale y
plot 'trajectory.dat' index 0 using 1:8 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3', \
     'trajectory.dat' index 1 using 1:8 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3'
set title 'Sink₁^ε (% of heads)'
unset logscale y
plot 'trajectory.dat' index 0 using 1:9 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3', \
     'trajectory.dat' index 1 using 1:9 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3'
set title 'attention entropy (nats)'
unset logscale y
plot 'trajectory.dat' index 0 using 1:10 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3', \
     'trajectory.dat' index 1 using 1:10 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3'
set title 'trainer''s validation loss'
unset logscale y
plot 'trajectory.dat' index 0 using 1:3 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#1f77b4' title 'A128-lr5e-3', \
     'trajectory.dat' index 1 using 1:3 with linespoints lw 2 dt 1 pt 7 ps 0.6 lc rgb '#d62728' title 'B128-lr5e-3'
unset multiplot
