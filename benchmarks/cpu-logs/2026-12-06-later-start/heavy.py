import time, torch
time.sleep(4.0)  # a heavy import (Albumentations' in each forkserver worker)
from torch.utils.data import Dataset
class Slow(Dataset):
    def __len__(self): return 3000
    def __getitem__(self, i):
        time.sleep(0.003)
        return torch.zeros(3, 32, 32), i % 10
def train_set():
    return Slow()
