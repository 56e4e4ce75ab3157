"""The transfer suite's solver protocols, by name: what ``solver.protocol`` takes, each record says, and the report
reads to place published rows (torch-free: reports/ loads no torch).

- :data:`CONVERGED` (the default): L-BFGS run to convergence at each value, strongest regularisation first, ties
  to the stronger, a stratified validation split (SimCLR's appendix B.8, as DINOv2 follows it).
- :data:`SSL_TRANSFER`: ssl-transfer's ``linear.py`` (Ericsson et al., CVPR 2021) step for step: 100 iterations a
  value, weakest first, warm starts, the first best kept, a plain random validation split
  (``classification/frozen/ssl_transfer.py``).
"""

CONVERGED = "converged"
SSL_TRANSFER = "ssl-transfer"
PROTOCOLS = (CONVERGED, SSL_TRANSFER)
