"""One queue over several regions: where and when each job runs, by capacity, price and carbon.

A manager holds one queue and dispatches each job to one region's cluster
(aisched.sim.regions.engine has the rules every policy runs under; policies.py the policies,
each as its authors run it). Each region (world.py) is a grid's carbon intensity, a spot
zone's availability trace, a GPU capacity and on-demand and spot prices. The jobs (jobs.py)
are the Philly trace by arrival, moved by whole weeks onto the carbon data (weekday and
time of day kept), each with a home region (where its data lives; drawn uniformly, since
the trace does not say) and, for the deferrable share, the carbon benchmark's deadline.

Forecasts are the Let's Wait Awhile error model on an hourly step: the current step exactly,
later ones with Gaussian noise of `forecast_error` times the grid's mean, drawn once per
grid, the same for every policy. Savings (figures.py) are against running every job at its
arrival in its home region with room for all.

`aisched simulate regions` runs it; benchmarks/regions.py runs it on the public data.
"""
