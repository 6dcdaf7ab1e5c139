python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
python3 bench/gpu/probe_eviction_state.py > $OUT/probe2.json || exit
python3 - > /tmp/cpus <<'P'
import json,statistics as st
d=json.load(open(__import__('os').environ['OUT']+'/probe2.json'))['by_calling_cpu_GBps']
m={int(k):st.median(v) for k,v in d.items()}
print(max(m,key=m.get), min(m,key=m.get))
P
read BEST WORST < /tmp/cpus; echo best=$BEST worst=$WORST
for pol in uvm belady; do for pin in best worst none; do
 case $pin in best) T="taskset -c $BEST";; worst) T="taskset -c $WORST";; none) T="";; esac
 s=$(date +%s.%N)
 $T python3 -m vmexplorer run --model vgg19 --batch 64 --capacity 50% --policy $pol --iterations 5 --warmup 1 --out $OUT/vgg19-$pol-$pin.measured.vms --force --format json > /tmp/o.json 2>/tmp/e || tail -3 /tmp/e
 python3 -c "import json;d=json.load(open('/tmp/o.json'));print('$pol $pin', round(d['summary']['iteration_ns']/1e6,1))"
done; done
python3 -c "import json;d=json.load(open('$OUT/probe2.json'));print({k:d[k] for k in ('back_to_back_GBps','by_calling_cpu_GBps')})"
