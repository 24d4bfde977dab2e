*2
$12
FIRN.TRIGGER
$1
k
