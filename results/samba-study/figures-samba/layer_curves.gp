# qeval plot: per-layer kurtosis, max |activation| and first-token attention
set terminal pngcairo size 1500,460 noenhanced font 'sans,10'
set output 'layer_curves.png'
set multiplot layout 1,3 title 'samba (full): per-layer statistics over 128 windows'
set xrange [0.5:4.5]
set grid
set key below vertical maxrows 8
set xlabel 'layer'
set xtics 1
set style line 1 lc rgb '#c0392b' lw 2 pt 7 ps 0.8
set style line 2 lc rgb '#2e86c1' lw 2 pt 5 ps 0.8
unset logscale y
set title 'kurtosis of hidden states (Gaussian = 3)'
set ylabel 'kurtosis'
plot 'layer_curves.dat' index 0 using 1:2 with linespoints ls 1 title 'first token', '' index 0 using 1:3 with linespoints ls 2 title 'other tokens'
unset logscale y
set title 'max |activation|'
set ylabel 'max_d |X|'
plot 'layer_curves.dat' index 0 using 1:4 with linespoints ls 1 title 'first token', '' index 0 using 1:5 with linespoints ls 2 title 'other tokens'
unset logscale y
set title 'attention to the first token'
set ylabel '%'
set yrange [0:*]
plot 'layer_curves.dat' index 0 using 1:7 with linespoints ls 1 title 'sink rate (alpha_1 > 0.3)', '' index 0 using 1:6 with linespoints ls 2 title '%first-attn (argmax on key 1)'
unset multiplot
