"""`python -m frenzy_scheduler.policies`: the registered policy names, one a line (what
`frenzy up --policy` accepts; the tool asks here rather than importing the scheduler)."""
from frenzy_scheduler.policies import policy_names

print("\n".join(policy_names()))
