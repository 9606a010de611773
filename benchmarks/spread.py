"""Within-guest spread of each arm's samples (cost over the arm's median in that guest) and the
comparisons of a compare --json document: python3 benchmarks/spread.py DOC [GUESTS]."""
import json,statistics as st,sys
import records
r=records.load(sys.argv[1])
n=len(r['orders']); 
# guests: consecutive halves (2 guests)
g=int(sys.argv[2]) if len(sys.argv)>2 else 2
size=n//g
within=[]
for a,trials in enumerate(r['trials']):
    for i in range(g):
        x=[t['cost_per_connection'] for t in trials[i*size:(i+1)*size] if t['cost_per_connection']]
        if len(x)>2:
            m=st.median(x); within+= [c/m for c in x]
print('within-guest sd', round(st.pstdev(within),4), 'n', len(within))
for c in r['comparisons']:
    print('ratio', c['ratio_median'], c['ratio_interval'], 'cv', c['ratio_cv'])
