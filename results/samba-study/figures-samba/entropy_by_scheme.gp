# qeval plot: entropy by layer (SAMBA Fig. 5): attention / implicit attention, selection
set terminal pngcairo size 1500,580 noenhanced font 'sans,10'
set output 'entropy_by_scheme.png'
set multiplot layout 1,2 title 'samba: entropy by layer for each scheme'
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
set style line 3 lc rgb '#2e86c1' lw 2 dt 2 pt 6 ps 0.8
set style line 4 lc rgb '#2e86c1' lw 2 pt 7 ps 0.8
set style line 5 lc rgb '#27ae60' lw 2 dt 2 pt 6 ps 0.8
set style line 6 lc rgb '#27ae60' lw 2 pt 7 ps 0.8
set style line 7 lc rgb '#8e44ad' lw 2 dt 2 pt 6 ps 0.8
set style line 8 lc rgb '#8e44ad' lw 2 pt 7 ps 0.8
set title '(a) attention entropy; dashed: SSM layers'' implicit attention'
plot 'entropy_by_scheme.dat' index 0 using 1:2 with linespoints ls 2 title 'full: attention layers', 'entropy_by_scheme.dat' index 0 using 1:3 with linespoints ls 1 title 'full: SSM layers (implicit attention)', 'entropy_by_scheme.dat' index 1 using 1:2 with linespoints ls 4 title 'int8-coarse: attention layers', 'entropy_by_scheme.dat' index 1 using 1:3 with linespoints ls 3 title 'int8-coarse: SSM layers (implicit attention)', 'entropy_by_scheme.dat' index 2 using 1:2 with linespoints ls 6 title 'int8-fine: attention layers', 'entropy_by_scheme.dat' index 2 using 1:3 with linespoints ls 5 title 'int8-fine: SSM layers (implicit attention)', 'entropy_by_scheme.dat' index 3 using 1:2 with linespoints ls 8 title 'w4-zeropoint: attention layers', 'entropy_by_scheme.dat' index 3 using 1:3 with linespoints ls 7 title 'w4-zeropoint: SSM layers (implicit attention)'
set yrange [*:*]
set title '(b) selection entropy of the SSM layers (axis not from 0)'
plot 'entropy_by_scheme.dat' index 0 using 1:4 with linespoints ls 2 title 'full: selection', 'entropy_by_scheme.dat' index 1 using 1:4 with linespoints ls 4 title 'int8-coarse: selection', 'entropy_by_scheme.dat' index 2 using 1:4 with linespoints ls 6 title 'int8-fine: selection', 'entropy_by_scheme.dat' index 3 using 1:4 with linespoints ls 8 title 'w4-zeropoint: selection', 5.54517744 with lines lc rgb '#7f8c8d' dt 3 lw 1.5 title 'uniform selection: log(window) = 5.545'
unset multiplot
