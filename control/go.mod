module ratchet/control

go 1.19
