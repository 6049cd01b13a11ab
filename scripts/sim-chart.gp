# sim-chart.gp -- each tenant's queue wait over time, one panel per policy, from fairq-sim --waits CSV.
# gnuplot -c sim-chart.gp WAITS.csv OUT.png|OUT.svg SCENARIO "POLICY..." "TENANT..." [HIGHLIGHT]
# Run through scripts/sim-chart.sh, which finds the scenario, policies and tenants in the CSV.
# A tenant named HIGHLIGHT (the large one) is drawn in grey behind the others, so the small
# tenants, the ones that suffer first, stand out.
data = ARG1
out = ARG2
scen = ARG3
pols = ARG4
tens = ARG5
big = ARG6

npol = words(pols)
cols = npol > 1 ? 2 : 1
rows = int((npol + cols - 1) / cols)
if (out[strlen(out) - 2:] eq "svg") {
    set terminal svg size 1200, 330 * rows dynamic font "sans,11" background "white"
} else {
    set terminal pngcairo size 1200, 330 * rows font "sans,10" background "white"
}
set output out
set datafile separator ","
set datafile missing "NaN"
set key outside right top vertical samplen 1 spacing 0.9 font ",8"
set grid ytics lc rgb "#dddddd"
set xlabel "submitted at (minutes)"
set ylabel "wait to dispatch (minutes)"
set yrange [0:*]
set xrange [0:*]
set multiplot layout rows, cols title sprintf("%s: queue wait of each run, by tenant", scen) font ",13"
# Every panel shares one wait scale, so that policies compare at a glance.
stats data skip 1 using ($6 / 60000.0) nooutput
set yrange [0:STATS_max * 1.05 + 0.01]
stats data skip 1 using ($4 / 60000.0) nooutput
set xrange [0:STATS_max * 1.02 + 0.01]
colors = "#1f77b4 #ff7f0e #2ca02c #d62728 #9467bd #8c564b #e377c2 #17becf #bcbd22 #7f7f7f #393b79 #637939"
color(j) = word(tens, j) eq big ? "#bbbbbb" : word(colors, 1 + (j - 1) % words(colors))
pick(p, t) = strcol(1) eq scen && strcol(2) eq p && strcol(3) eq t
do for [i = 1:npol] {
    p = word(pols, i)
    set title p font ",11"
    plot for [j = 1:words(tens)] data skip 1 \
        using (pick(p, word(tens, j)) ? $4 / 60000.0 : NaN):($6 / 60000.0) \
        with points pt 7 ps (word(tens, j) eq big ? 0.35 : 0.7) \
        lc rgb color(j) title word(tens, j)
}
unset multiplot
