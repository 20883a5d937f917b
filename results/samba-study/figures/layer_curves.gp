# qeval plot: per-layer kurtosis, max |activation| and first-token attention
set terminal pngcairo size 1500,540 noenhanced font 'sans,10'
set output 'layer_curves.png'
set multiplot layout 1,3 title '3 models (full): per-layer statistics; dashed: first token (sink rate), solid: other tokens (%first-attn)'
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
unset logscale y
set title 'kurtosis of hidden states (Gaussian = 3)'
set ylabel 'kurtosis'
plot 'layer_curves.dat' index 0 using 1:2 with linespoints ls 1 title 'attn-swa: first token', '' index 0 using 1:3 with linespoints ls 2 title 'attn-swa: other tokens', 'layer_curves.dat' index 1 using 1:2 with linespoints ls 3 title 'mamba-mlp: first token', '' index 1 using 1:3 with linespoints ls 4 title 'mamba-mlp: other tokens', 'layer_curves.dat' index 2 using 1:2 with linespoints ls 5 title 'samba: first token', '' index 2 using 1:3 with linespoints ls 6 title 'samba: other tokens'
unset logscale y
set title 'max |activation|'
set ylabel 'max_d |X|'
plot 'layer_curves.dat' index 0 using 1:4 with linespoints ls 1 title 'attn-swa: first token', '' index 0 using 1:5 with linespoints ls 2 title 'attn-swa: other tokens', 'layer_curves.dat' index 1 using 1:4 with linespoints ls 3 title 'mamba-mlp: first token', '' index 1 using 1:5 with linespoints ls 4 title 'mamba-mlp: other tokens', 'layer_curves.dat' index 2 using 1:4 with linespoints ls 5 title 'samba: first token', '' index 2 using 1:5 with linespoints ls 6 title 'samba: other tokens'
unset logscale y
set title 'attention to the first token'
set ylabel '%'
set yrange [0:*]
plot 'layer_curves.dat' index 0 using 1:7 with linespoints ls 1 title 'attn-swa: sink rate (alpha_1 > 0.3)', '' index 0 using 1:6 with linespoints ls 2 title 'attn-swa: %first-attn (argmax on key 1)', 'layer_curves.dat' index 1 using 1:7 with linespoints ls 3 title 'mamba-mlp: sink rate (alpha_1 > 0.3)', '' index 1 using 1:6 with linespoints ls 4 title 'mamba-mlp: %first-attn (argmax on key 1)', 'layer_curves.dat' index 2 using 1:7 with linespoints ls 5 title 'samba: sink rate (alpha_1 > 0.3)', '' index 2 using 1:6 with linespoints ls 6 title 'samba: %first-attn (argmax on key 1)'
unset multiplot
