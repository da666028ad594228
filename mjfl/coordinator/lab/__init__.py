"""The lab service (`mjfl serve`): one coordinator whose devices stay connected, runs that researchers submit and
that share the fleet round by round (docs/lab.md)."""
