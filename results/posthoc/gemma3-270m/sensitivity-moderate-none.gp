# qeval sensitivity: ΔNLL per unit (bars, left axis), input max |x| (points, right axis)
set terminal pngcairo size 900,620 noenhanced font 'sans,10'
set output 'sensitivity-moderate-none.png'
set title 'gemma-3-270m-q4_k_m on test.joined.txt: 4 windows of 512 tokens (2044 scored); int8-moderate applied to one layer kind at a time'
set xrange [0.4:7.6]
set style fill solid 0.75 border -1
set boxwidth 0.7
set grid ytics
set xtics rotate by -50 scale 0 font ',9'
set bmargin 8
set key top right opaque
set ylabel 'ΔNLL vs full precision (nats per token)'
set y2label 'input max |x| (mean over sequences, log scale)'
set y2tics
set logscale y2
set ytics nomirror
plot 'sensitivity-moderate-none.dat' using 1:3:xtic(2) with boxes lc rgb '#c0392b' title 'ΔNLL', '' using 1:3:4 with yerrorbars lc rgb '#000000' pt -1 title '± se', '' using 1:5 axes x1y2 with points pt 7 ps 1.1 lc rgb '#2e86c1' title 'max |x|, first position', '' using 1:6 axes x1y2 with points pt 5 ps 0.9 lc rgb '#27ae60' title 'max |x|, other positions'
