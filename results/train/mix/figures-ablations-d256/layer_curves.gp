# qeval plot: per-layer kurtosis, max |activation| and first-token attention
set terminal pngcairo size 1500,580 noenhanced font 'sans,10'
set output 'layer_curves.png'
set multiplot layout 1,3 title '4 models (full): per-layer statistics; dashed: first token (sink rate), solid: other tokens (%first-attn)'
set xrange [0.5:4.5]
set grid
set key below vertical maxrows 8
set xlabel 'layer'
set xtics 1
set style line 1 lc rgb '#c0392b' lw 2 dt 2 pt 6 ps 0.8
set style line 2 lc rgb '#c0392b' lw 2 pt 7 ps 0.8
set style line 3 lc rgb '#2e86c1' lw 2 dt 2 pt 6 ps 0.8
set style line 4 lc rgb '#2e86c1' lw 2 pt 7 ps 0.8
set style line 5 lc rgb '#27ae60' lw 2 dt 2 pt 6 ps 0.8
set style line 6 lc rgb '#27ae60' lw 2 pt 7 ps 0.8
set style line 7 lc rgb '#8e44ad' lw 2 dt 2 pt 6 ps 0.8
set style line 8 lc rgb '#8e44ad' lw 2 pt 7 ps 0.8
set logscale y
set title 'kurtosis of hidden states (Gaussian = 3)'
set ylabel 'kurtosis'
plot 'layer_curves.dat' index 0 using 1:2 with linespoints ls 1 title 'A-d256-s0-10k: first token', '' index 0 using 1:3 with linespoints ls 2 title 'A-d256-s0-10k: other tokens', 'layer_curves.dat' index 1 using 1:2 with linespoints ls 3 title 'A-B-d256-s0-10k: first token', '' index 1 using 1:3 with linespoints ls 4 title 'A-B-d256-s0-10k: other tokens', 'layer_curves.dat' index 2 using 1:2 with linespoints ls 5 title 'B-A-d256-s0-10k: first token', '' index 2 using 1:3 with linespoints ls 6 title 'B-A-d256-s0-10k: other tokens', 'layer_curves.dat' index 3 using 1:2 with linespoints ls 7 title 'B-d256-s0-10k: first token', '' index 3 using 1:3 with linespoints ls 8 title 'B-d256-s0-10k: other tokens'
set logscale y
set title 'max |activation|'
set ylabel 'max_d |X|'
plot 'layer_curves.dat' index 0 using 1:4 with linespoints ls 1 title 'A-d256-s0-10k: first token', '' index 0 using 1:5 with linespoints ls 2 title 'A-d256-s0-10k: other tokens', 'layer_curves.dat' index 1 using 1:4 with linespoints ls 3 title 'A-B-d256-s0-10k: first token', '' index 1 using 1:5 with linespoints ls 4 title 'A-B-d256-s0-10k: other tokens', 'layer_curves.dat' index 2 using 1:4 with linespoints ls 5 title 'B-A-d256-s0-10k: first token', '' index 2 using 1:5 with linespoints ls 6 title 'B-A-d256-s0-10k: other tokens', 'layer_curves.dat' index 3 using 1:4 with linespoints ls 7 title 'B-d256-s0-10k: first token', '' index 3 using 1:5 with linespoints ls 8 title 'B-d256-s0-10k: other tokens'
unset logscale y
set title 'attention to the first token'
set ylabel '%'
set yrange [0:*]
plot 'layer_curves.dat' index 0 using 1:7 with linespoints ls 1 title 'A-d256-s0-10k: sink rate (alpha_1 > 0.3)', '' index 0 using 1:6 with linespoints ls 2 title 'A-d256-s0-10k: %first-attn (argmax on key 1)', 'layer_curves.dat' index 1 using 1:7 with linespoints ls 3 title 'A-B-d256-s0-10k: sink rate (alpha_1 > 0.3)', '' index 1 using 1:6 with linespoints ls 4 title 'A-B-d256-s0-10k: %first-attn (argmax on key 1)', 'layer_curves.dat' index 2 using 1:7 with linespoints ls 5 title 'B-A-d256-s0-10k: sink rate (alpha_1 > 0.3)', '' index 2 using 1:6 with linespoints ls 6 title 'B-A-d256-s0-10k: %first-attn (argmax on key 1)', 'layer_curves.dat' index 3 using 1:7 with linespoints ls 7 title 'B-d256-s0-10k: sink rate (alpha_1 > 0.3)', '' index 3 using 1:6 with linespoints ls 8 title 'B-d256-s0-10k: %first-attn (argmax on key 1)'
unset multiplot
