# qeval plot: entropy by layer (SAMBA Fig. 5): attention / implicit attention, selection
set terminal pngcairo size 1500,460 noenhanced font 'sans,10'
set output 'entropy_by_layer.png'
set multiplot layout 1,2 title 'samba (full): entropy by layer'
set datafile missing '-'
set xrange [0.5:4.5]
set yrange [0:*]
set grid
set key below vertical maxrows 8
set xlabel 'layer'
set ylabel 'entropy (nats)'
set xtics 1
set style line 1 lc rgb '#c0392b' lw 2 dt 2 pt 6 ps 0.8
set style line 2 lc rgb '#c0392b' lw 2 pt 7 ps 0.8
set title '(a) attention entropy; dashed: SSM layers'' implicit attention'
plot 'entropy_by_layer.dat' index 0 using 1:2 with linespoints ls 2 title 'attention layers', 'entropy_by_layer.dat' index 0 using 1:3 with linespoints ls 1 title 'SSM layers (implicit attention)'
set yrange [*:*]
set title '(b) selection entropy of the SSM layers (axis not from 0)'
plot 'entropy_by_layer.dat' index 0 using 1:4 with linespoints ls 2 title 'selection', 5.54517744 with lines lc rgb '#7f8c8d' dt 3 lw 1.5 title 'uniform selection: log(window) = 5.545'
unset multiplot
