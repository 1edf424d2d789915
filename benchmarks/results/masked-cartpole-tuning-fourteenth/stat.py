import csv,sys,json,glob,statistics
out=sys.argv[1]
rows=[json.loads(l) for l in open(out+'.jsonl') if '"seed"' in l]
reach=0; fin=0; both=0; fps=[]; lows=[]; first=[]
for r in rows:
    ev=list(csv.DictReader(open(glob.glob(f"{out}/*-{r['seed']}/eval.csv")[0])))
    m=max(float(e['eval_return_mean']) for e in ev)
    f=[int(e['frames']) for e in ev if float(e['eval_return_mean'])>=500]
    g=r['greedy_return']
    reach+= m>=500; fin+= g>=499; fps.append(r['frames_per_s'])
    if f: first.append(f[0])
    if g<499 or m<500: lows.append((r['seed'],round(g,1),m))
print(f"{out.split('/')[-1]}: n={len(rows)} reach500={reach} final>=499={fin} fps_med={statistics.median(fps):.0f} first_med={statistics.median(first) if first else None} lows={lows}")
