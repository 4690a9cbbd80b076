"""A person's pulls, read from an export: python examples/tutorial/pulls.py pulls.parquet"""

import json
import sys

import pyarrow.parquet as pq

trial = None
for row in sorted(pq.read_table(sys.argv[1]).to_pylist(), key=lambda row: (row["trial_id"], row["tick"])):
    if row["trial_id"] != trial:
        trial = row["trial_id"]
        print(f"trial {trial} ({row['end_reason']}), {row['actor']} played by {row['implementation']}:")
    seen = json.loads(row["observation"])
    pulled = "-" if row["action"] is None else json.loads(row["action"])
    cheers = [r["sender"] for r in row["reward_sources"] if r["sender"] != "env"]
    print(
        f"  tick {row['tick']:2}: knot {seen['knot']:+d}, stamina {seen['stamina']}, pulled {pulled}"
        + (f", cheered by {', '.join(cheers)}" if cheers else "")
        + (f", reward {row['reward']:+g}" if row["reward"] else "")
    )
