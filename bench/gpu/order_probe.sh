# Does a paging run's eviction rate depend on the run before it? VGG-19 b64 at 50%, one process per run,
# in an order where uvm and autovm each follow a `device` run and each other.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD || exit
mkdir -p /tmp/order; i=0
for pol in device uvm autovm uvm device autovm uvm uvm autovm autovm device uvm; do
  i=$((i+1)); cap=50%; [ $pol = device ] && cap=100%
  python3 -m vmexplorer run --model vgg19 --batch 64 --capacity $cap --policy $pol --iterations 5 --warmup 1 \
    --out /tmp/order/$(printf %02d $i)-$pol.measured.vms --force --format json > /tmp/o.json 2>/tmp/e || tail -2 /tmp/e
  echo "$i $pol $(date +%s.%N)"
done
tar -C /tmp -czf $OUT/order.tgz order
