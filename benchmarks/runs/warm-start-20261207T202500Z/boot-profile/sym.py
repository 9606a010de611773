import bisect,collections,sys
syms=[]
for l in open('/tmp/bootx/kallsyms'):
    p=l.split()
    if len(p)>=3 and p[1] in 'tTwW': syms.append((int(p[0],16),p[2]))
syms.sort(); addrs=[a for a,_ in syms]
c=collections.Counter()
for l in open(sys.argv[1]):
    r=int(l,16); i=bisect.bisect_right(addrs,r)-1
    c[syms[i][1] if r>=0xffffffff80000000 else ('user' if r<0x800000000000 else 'other')]+=1
n=sum(c.values()); print('samples',n)
for k,v in c.most_common(30): print(v, round(100*v/n,1), k)
